"""AUROC and TPR at low FPR, per-seed and aggregated tables, ROC plots."""
