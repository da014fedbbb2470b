"""The Compare tab: every quant level side by side (rows, controller, table, chart, panel)."""
