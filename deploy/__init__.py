"""Shipped deployment files and their generators (not installed with handoffmon)."""
