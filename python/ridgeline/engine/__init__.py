"""The engine's Python side: one plan prepared and priced in the Rust core (``estimate``), the
runtime it runs under (``runtimes``), its collectives (``collectives``), the shipped fits it is
priced with (``fits``, ``fitted``) and the structure version those fits are stamped with."""
