"""SpecTune."""
