"""The Python environments builds and smoke tests run in: interpreters, the torch-environment store, dependency
layers, the torch folders builds mount."""
