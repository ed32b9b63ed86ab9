"""The demo run and the tiny ComfyUI models it (and the tests) train on."""
