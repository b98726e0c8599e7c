"""The SwitchML testbed as one installable package.

The testbed is a tree of folders (base/, protocol/, hosts/, p4/, configs/, ...) that import
one another by their own short names. Installed, that tree lives inside this package
(site-packages/switchml_testbed/), so that no generic name such as ``base`` or ``analysis``
lands in site-packages; the commands (``switchml-run``, ``switchml-analysis``,
``switchml-labs``, in ``cli``) put the tree on ``sys.path`` in their own process only.
In a checkout the tree is this package's parent folder. docs/install.md says why.
"""

__version__ = "0.2.0"
"""The one place the version is written: pyproject.toml reads it from here."""
