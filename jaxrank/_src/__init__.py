"""jaxrank's implementation. Private: import the public API from `jaxrank` instead."""
