"""Experiments: configs in, validated runs and tidy results out."""
