"""Choosing settings: the planner, the rows of Compare, and Explain's plain words."""
