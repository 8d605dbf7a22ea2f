"""The careful service scheduler: spread, its machine index and reasons."""
