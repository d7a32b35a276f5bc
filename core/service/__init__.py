"""The service facade every interface calls: plan -> guard -> execute -> audit."""
