"""SwitchML's own analysis: its analytic models (line rate, pace, the pool's window: models.py),
which its figures, labs and notebooks draw against."""
