"""The Export tab: the settings in each runner's own format, previewed and saved."""
