"""Reports: JUnit XML, the terminal table, GitHub job summary and annotations."""
