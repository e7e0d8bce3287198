"""Developer tools run from the Makefile (`tools/emulators.py`, `tools/deploy`,
`tools/docs.py`); a package so that tests import them as `tools.emulators`."""
