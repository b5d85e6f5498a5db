"""``biomjepa.__version__``, importable without the ``pp``/``tl``/``pl`` namespaces (``from ._version import __version__``)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:  # the installed distribution's metadata: one version, set in pyproject.toml
    __version__ = version("biomjepa")
except PackageNotFoundError:  # pragma: no cover - a source tree on sys.path, never installed
    __version__ = "0.0.0+unknown"
