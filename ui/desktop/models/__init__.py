"""The Models tab: the library, the catalog, and the model open in the window."""
