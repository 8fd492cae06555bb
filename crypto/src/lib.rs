//! Security policies, certificates and PKI.
