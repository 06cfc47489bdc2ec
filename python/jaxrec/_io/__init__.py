"""Where records come from and go to: paths and URLs, framed TFRecord files, record indexes."""
