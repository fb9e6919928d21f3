"""Everything is in pyproject.toml but for kubetrain-auto.pth: a .pth file goes at the top of
site-packages, where Python's site module runs its import line at every start, and setuptools
has no setting for a file there, so build_py copies it beside the built modules."""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "kubetrain-auto.pth"


class BuildPyWithPth(build_py):
    def run(self):
        super().run()
        self.copy_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), "src", PTH),
                       os.path.join(self.build_lib, PTH))


setup(cmdclass={"build_py": BuildPyWithPth})
