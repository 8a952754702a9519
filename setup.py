"""Builds the man pages and shell completions from the parsers (simpleperf.lab.manual) and
installs them with the package, and the optional compiled pieces: the streams' fast path
(src/simpleperf/_fastpath.c) and the delay line's queue reader
(src/simpleperf/lab/net/shaping/_queue_reader.c). A machine without a C compiler or Python's
headers installs without them and runs the pure-Python paths; everything else is in
pyproject.toml."""

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
      ext_modules=[Extension(name, [source], extra_compile_args=["-O2"], optional=True)
                   for name, source in (
                       ("simpleperf._fastpath", "src/simpleperf/_fastpath.c"),
                       ("simpleperf.lab.net.shaping._queue_reader",
                        "src/simpleperf/lab/net/shaping/_queue_reader.c"))],
      data_files=[(directory, [str(MADE / directory / name) for name in names])
                  for directory, names in manual.INSTALLED.items()])
