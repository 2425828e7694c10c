"""Qualcomm AI Hub as a board (``transport: ai-hub``): the client, the device, the
jobs and what their answers mean. Driven through the official ``qai-hub`` client,
unmodified (the ``ai-hub`` extra); imported only when an AI Hub board is used."""
