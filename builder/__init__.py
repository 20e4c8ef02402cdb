"""The mamba-ssm wheel farm: plan, render, build, verify and index wheels.

Imports no torch. Entry point: ``python -m builder <command>``.
"""
