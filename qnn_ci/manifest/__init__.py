"""The user's configuration files: ``qnn-ci.yaml`` (YAML with lines, the schema,
defaults), ``qnn-boards.yaml`` and ``.qualcomm-env``."""
