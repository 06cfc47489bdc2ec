"""``tf.train.Example`` messages: the protobuf classes, encoders, image/tensor codecs, schemas."""
