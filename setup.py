"""Build hook: the wheel carries the repository's top-level ``models.yaml`` as package data
(``specchat/models.yaml``), so that the installed ``specchat`` command finds the shipped models
outside the checkout. Everything else is in pyproject.toml."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithModels(build_py):
    """``build_py``, then ``models.yaml`` copied next to the package's modules."""

    def run(self) -> None:
        super().run()
        if not getattr(self, "editable_mode", False):  # an editable install reads the top-level file itself
            self.copy_file("models.yaml", str(Path(self.build_lib) / "specchat" / "models.yaml"))


setup(cmdclass={"build_py": BuildPyWithModels})
