"""Topology files (YAML) and their model: hosts, switches, links with shaping."""
