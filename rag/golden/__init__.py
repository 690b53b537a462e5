"""Golden-set authoring: miners (rag/golden/miners/), pooling, label checks and the review
editor. Above the ledger (pooling reads sweep rows), below the application."""
