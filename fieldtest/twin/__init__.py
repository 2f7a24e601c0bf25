"""The digital twin's processes: a Create 3 model, the twin robot process and the host streamer."""
