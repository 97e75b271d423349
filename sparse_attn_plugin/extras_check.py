"""Imported first by every command's module (or the package it is in, where that imports
an extra): a command whose extras are not installed ends here, in one line, before any
work (:func:`.extras.refuse_missing_extras`; imported by anything else, it does nothing)."""

from .extras import refuse_missing_extras

refuse_missing_extras()
