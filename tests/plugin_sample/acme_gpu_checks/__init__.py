"""A sample dl-doctor plugin: one probe, one check, written only against the public plugin API."""
