"""One module per pipeline stage (their order: qnn_ci.stages.registry.STAGE_ORDER)."""
