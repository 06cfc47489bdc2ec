"""TensorFlow Datasets directories: metadata, features, split strings (:mod:`jaxrec.tfds`)."""
