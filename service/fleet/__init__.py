"""What replicas of one fleet share: the corpus write lease (``lease``) and fleet-wide
limits (``limits``). See docs/operations.md, "Running several replicas"."""
