"""Downstream evaluation: text-to-text tasks, their metrics, and mixtures (docs/downstream.md)."""
