"""Builds the man pages and shell completions from the parsers (simpleperf.lab.manual) and
installs them with the package, and the optional compiled fast path of the UDP sender
(src/simpleperf/_fastpath.c: a machine without a C compiler or Python's headers installs
without it and runs the pure-Python path); everything else is in pyproject.toml."""

import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "src"))
from simpleperf.lab import manual  # noqa: E402  (the package being built, from its source)

MADE = Path("build") / "manual"  # relative: setuptools wants data files relative to here


class BuildWithManual(build_py):
    def run(self) -> None:
        super().run()
        manual.write(HERE / MADE)


setup(cmdclass={"build_py": BuildWithManual},
      ext_modules=[Extension("simpleperf._fastpath", ["src/simpleperf/_fastpath.c"],
                             extra_compile_args=["-O2"], optional=True)],
      data_files=[(directory, [str(MADE / directory / name) for name in names])
                  for directory, names in manual.INSTALLED.items()])
