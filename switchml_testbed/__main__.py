"""``python -m switchml_testbed run|analysis|labs ARGS``: switchml_testbed.cli.main."""

from switchml_testbed.cli import main

main()
