"""What a reply is made of after the fact: the trace format, the cost ledger, the audit, the calibration."""
