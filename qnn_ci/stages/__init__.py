"""One module per pipeline stage (see qnn_ci.pipeline.STAGE_ORDER)."""
