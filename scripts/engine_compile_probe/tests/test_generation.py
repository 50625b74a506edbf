def test_generation(specdec_server, specdec_workload, specdec_record):
    measurement = specdec_record.run(specdec_server, specdec_workload)
    assert measurement.completion_tokens > 0
