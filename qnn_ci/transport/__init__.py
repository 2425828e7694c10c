"""How qnn-ci reaches a board: SSH (fabric), ADB, or the local machine."""
