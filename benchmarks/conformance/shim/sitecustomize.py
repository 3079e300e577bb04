"""Installs the conformance import aliases in every Python process started with this folder on
``PYTHONPATH`` (see ``_conformance_alias.py``)."""

import _conformance_alias

_conformance_alias.install()
