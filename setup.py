"""The optional compiled core, msgpack-python's pattern (metadata stays in pyproject.toml).

``tiered_core._speedups._core`` is built from Cython when Cython and a C compiler (and
zlib's header) are there. When any of them is missing or the build fails, the install
carries on without it and says so in one line: the pure-Python codec is then used
(``tiered_core.codec._impl.IMPLEMENTATION == "pure-python"``). ``TIERED_NO_EXTENSIONS=1``
skips the build on purpose.
"""

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

NAME = "tiered_core._speedups._core"
SOURCE = os.path.join("tiered_core", "_speedups", "_core.pyx")
#: C included by the Cython source (the CRC-32 kernel).
HEADERS = [os.path.join("tiered_core", "_speedups", "crc32_clmul.h")]


def _say_pure(why: str) -> None:
    print(f"tiered-core: C extension {NAME} not built ({why}); using the pure-Python path",
          file=sys.stderr, flush=True)


class OptionalBuildExt(build_ext):
    """build_ext that turns a missing or failing compiler into the pure-Python path."""

    _said = False

    def _skip(self, exc: BaseException) -> None:
        if not OptionalBuildExt._said:
            OptionalBuildExt._said = True
            cc = getattr(getattr(self, "compiler", None), "compiler_so", None)
            if cc and not isinstance(cc, str):
                cc = cc[0]
            what = f"the C compiler {cc!r} failed" if cc else "no C compiler"
            _say_pure(f"{what}: {type(exc).__name__}")
        # A stale in-place build from an earlier compiler would silently win: drop it.
        for ext in self.extensions:
            path = self.get_ext_fullpath(ext.name)
            inplace = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                   *ext.name.split(".")[:-1], os.path.basename(path))
            # ... and so would the copy an earlier build left in build_lib, which an in-place
            # build copies back into the source tree after building.
            built = os.path.join(os.path.abspath(self.build_lib), *ext.name.split(".")[:-1],
                                 os.path.basename(path))
            for stale in {path, inplace, built} if self.inplace else {inplace, built}:
                if os.path.exists(stale):
                    os.remove(stale)

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler at all (DistutilsPlatformError) and the like
            self._skip(exc)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # CompileError, LinkError, a compiler that is `false`...
            self._skip(exc)


def _extensions() -> list[Extension]:
    if os.environ.get("TIERED_NO_EXTENSIONS", "").strip() not in ("", "0"):
        _say_pure("TIERED_NO_EXTENSIONS is set")
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        _say_pure("Cython is not installed")
        return []
    ext = Extension(NAME, [SOURCE], libraries=["z"], extra_compile_args=["-O2"], depends=HEADERS)
    try:
        return cythonize([ext], compiler_directives={"language_level": "3"}, quiet=True)
    except Exception as exc:  # pragma: no cover - a Cython too old or broken
        _say_pure(f"cythonize failed: {exc}")
        return []


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
