"""The demo: the example workflow trained on the DreamBooth dog photos (scripts/demo.sh)."""
