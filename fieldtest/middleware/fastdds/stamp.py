"""Python side of ``fastddsstamp.cpp``: the Fast DDS participant, writers and readers the kit's
transport drives, with send and arrival stamps taken in C.

The helper is compiled on first use (``fieldtest.cbuild``; ``tools/install.sh`` does it at install)
against Debian's libfastrtps (2.9, with its DDS Security plugins). ctypes releases the GIL during
each call, so Fast DDS's threads never wait for Python.
"""

from __future__ import annotations

import ctypes as ct
import functools
from pathlib import Path

from fieldtest.cbuild import BuildError, build_cxx
from fieldtest.errors import FieldtestError
from fieldtest.middleware.dds.ddsstamp import declare_queue

SOURCE = Path(__file__).with_name("fastddsstamp.cpp")
# What the helper links: Debian's libfastrtps-dev (Fast DDS 2.9) and its CDR library
LIBRARIES = ("fastrtps", "fastcdr")


class FastDdsLibraryError(FieldtestError, RuntimeError):
    """The Fast DDS helper could not be built or loaded."""


@functools.lru_cache(maxsize=1)
def library() -> ct.CDLL:
    try:
        lib = ct.CDLL(str(build_cxx(SOURCE, shared=True, libs=LIBRARIES)))
    except (BuildError, OSError) as exc:
        raise FastDdsLibraryError(
            f"the Fast DDS helper is unavailable (needs g++ and libfastrtps-dev: tools/install.sh): {exc}"
        ) from None
    i32, i64, u32, ptr, text = ct.c_int32, ct.c_int64, ct.c_uint32, ct.c_void_p, ct.c_char_p
    lib.ft_participant_new.argtypes = [u32, text, text, ct.c_int, text, text, text, text, u32]
    lib.ft_participant_new.restype = ptr
    lib.ft_participant_free.argtypes = [ptr]
    lib.ft_participant_free.restype = None
    lib.ft_writer_new.argtypes = [ptr, text, text, ct.c_int, ct.c_int, ct.c_int, ct.c_int]
    lib.ft_writer_new.restype = ptr
    lib.ft_reader_new.argtypes = [*lib.ft_writer_new.argtypes, ptr, i32]
    lib.ft_reader_new.restype = ptr
    lib.ft_write_stamped.argtypes = [ptr, text, u32, u32, i64]
    lib.ft_write_stamped.restype = i64
    lib.ft_write.argtypes = [ptr, text, u32]
    lib.ft_write.restype = ct.c_int
    lib.ft_now.argtypes = [i64]
    lib.ft_now.restype = i64
    lib.ft_matched.argtypes = [ptr]
    lib.ft_matched.restype = ct.c_int
    return declare_queue(lib)
