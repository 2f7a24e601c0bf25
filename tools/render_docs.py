"""Fill the docs' generated blocks from the summaries in reference/ (fieldtest.testkit.docblocks).

    .venv/bin/python tools/render_docs.py           # rewrite every block from its data
    .venv/bin/python tools/render_docs.py --check   # exit 1 and name what is out of step

A benchmark writes its summary with ``--reference reference/<name>.json``; this then puts its
tables into the docs. The check also names any table, paragraph or code block outside the blocks
that quotes figures and is not marked as inputs (``hand_quoted_tables``, ``hand_quoted_figures``). tests/test_reference_docs.py runs the check.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fieldtest.record.reference import ReferenceFormatError
from fieldtest.testkit.docblocks import doc_paths, fill, hand_quoted_figures, hand_quoted_tables, problems

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; list what is out of step")
    args = parser.parse_args()
    try:
        if not args.check:
            for path in doc_paths(ROOT):
                text = path.read_text()
                if (new := fill(text, ROOT)) != text:
                    path.write_text(new)
                    print(f"rendered {path.relative_to(ROOT)}")
        found = problems(ROOT) + hand_quoted_tables(ROOT) + hand_quoted_figures(ROOT)
    except ReferenceFormatError as exc:
        print(exc, file=sys.stderr)
        return 2
    for line in found:
        print(line, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
