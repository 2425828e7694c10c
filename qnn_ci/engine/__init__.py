"""The engine: the pipeline, the stage contract, results, the cache and relocation."""
