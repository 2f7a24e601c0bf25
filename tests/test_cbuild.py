"""Where ``fieldtest.cbuild`` keeps a helper's build: a new name for every change of what it compiles."""

from __future__ import annotations

import hashlib

from fieldtest.cbuild import built_path


def test_editing_a_file_the_source_includes_names_a_new_build(tmp_path, monkeypatch):
    monkeypatch.setenv("FIELDTEST_CACHE", str(tmp_path / "cache"))
    (tmp_path / "shared.c").write_text("int shared(void) { return 1; }\n")
    source = tmp_path / "tool.c"
    source.write_text(
        '#include <stdio.h>\n#include "shared.c"\n#include "missing.h"\nint main(void) { return shared(); }\n'
    )
    first = built_path(source)
    (tmp_path / "shared.c").write_text("int shared(void) { return 2; }\n")
    assert built_path(source) != first
    assert built_path(source).name.startswith("tool-")


def test_a_source_without_local_includes_keeps_its_build_name(tmp_path, monkeypatch):
    """The name is the source's own hash, as before includes counted: existing builds stay valid."""
    monkeypatch.setenv("FIELDTEST_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "alone.c"
    source.write_text("#include <stdint.h>\nint main(void) { return 0; }\n")
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:12]
    assert built_path(source, ".so").name == f"alone-{digest}.so"
