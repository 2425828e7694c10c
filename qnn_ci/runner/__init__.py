"""What both shells need to start the engine: options, manifests opened into
pipelines, the changed-exports selection (``--changed-since``)."""
