"""Package resources: vocabulary, gene-identifier table, orthologs (see ATTRIBUTION.md)."""
