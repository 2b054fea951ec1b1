"""Load tests and test corpora for streamdet (not part of the installed package)."""
