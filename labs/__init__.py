"""Classroom labs: skeletons, an autograder and plots for a SwitchML lab series (labs/README.md)."""
