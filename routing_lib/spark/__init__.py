"""Spark edges: session, sources, the stateful step and the Delta writer.

Importing the package (as every Python worker running a routelake function does) installs
the zip-import fix of zip_imports.py."""

from routing_lib.spark.zip_imports import install as _install_zip_import_fix

_install_zip_import_fix()
