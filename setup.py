"""Build the one extension module, fastreplay._core, from csrc/ and Cython.

Switches (environment variables, read at build time):
  FASTREPLAY_DEBUG=1     -O0 -g3, assertions and Cython bounds checks on
  FASTREPLAY_SANITIZE=1  AddressSanitizer + UBSan (see README, Development)
  FASTREPLAY_WERROR=1    warnings are errors (CI only)
  FASTREPLAY_ANNOTATE=1  write Cython's HTML annotation next to the .pyx
Never -march=native: wheels must run on any x86-64 / aarch64 machine.
"""

import glob
import os
import sys

from Cython.Build import cythonize
from setuptools import Extension, setup


def flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


DEBUG = flag("FASTREPLAY_DEBUG")
compile_args, link_args = [], []
if sys.platform != "win32":
    compile_args += ["-std=c11", "-Wall", "-Wextra", "-Wno-unused-function"]
    compile_args += ["-O0", "-g3", "-UNDEBUG"] if DEBUG else ["-O3"]
    # Only PyInit__core is exported: calls into csrc/ and between its files
    # are direct instead of through PLT stubs, and calls into libpython and
    # libc load their GOT entry instead of jumping through one.  The writer
    # step is bound by instruction-cache misses, and ~60 of its ~540 per step
    # (cachegrind, session 14) were PLT stubs.
    if sys.platform.startswith("linux"):
        compile_args += ["-fvisibility=hidden", "-fno-plt"]
    if flag("FASTREPLAY_WERROR"):
        compile_args.append("-Werror")
    if flag("FASTREPLAY_SANITIZE"):
        san = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer"]
        compile_args += san
        link_args += san
    link_args.append("-pthread")

core = Extension(
    "fastreplay._core",
    sources=["fastreplay/_core.pyx", *sorted(glob.glob("csrc/*.c"))],
    depends=[*glob.glob("csrc/*.h"), "fastreplay/_csrc.pxd",
             *glob.glob("fastreplay/*.pxi")],
    include_dirs=["csrc"],
    # shm_open lives in librt before glibc 2.34 (an empty stub after).
    libraries=["rt"] if sys.platform.startswith("linux") else [],
    extra_compile_args=compile_args,
    extra_link_args=link_args,
)

setup(
    ext_modules=cythonize(
        [core],
        compiler_directives={
            "language_level": 3,
            "embedsignature": True,
            "boundscheck": DEBUG,
            "wraparound": False,
            "initializedcheck": DEBUG,
            "cdivision": True,
        },
        annotate=flag("FASTREPLAY_ANNOTATE"),
    )
)
