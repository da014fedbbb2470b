"""The ggtune command line (:func:`ui.cli.main.run`): one module per command."""
