"""The Recommend tab: goals in, the planner's settings out, applied or pooled."""
