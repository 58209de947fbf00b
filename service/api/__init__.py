"""gRPC servicers: protobuf in, domain calls, protobuf out. No business logic here."""
