# install rules (placeholder)
