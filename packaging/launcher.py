"""The frozen bundle's script: PyInstaller runs this file as ``__main__``.

All the logic is in :mod:`ui.entry` (also the ``ggtune`` console script), imported as a
module so that the runner's spawn children, which this same executable becomes, find
every function they unpickle under its real module name.
"""

from ui.entry import main

if __name__ == "__main__":
    main()
