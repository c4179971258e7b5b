"""Metrics providers: each turns one backend into raw ``Series`` of percent samples."""
